# expect: reject eim-argument
# env: eim eim/http.yaml http_request observer
# log's `len <= 4096` cannot be proven for a length up to 8192.
stdw [%r10-8], 0
call 7
mov %r2, %r0
and %r2, 0x1fff
add %r2, 1
mov %r1, %r10
add %r1, -8
call 1002
mov %r0, 0
exit
