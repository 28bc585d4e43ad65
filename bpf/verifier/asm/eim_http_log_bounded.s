# expect: accept
# env: eim eim/http.yaml http_request observer
stdw [%r10-16], 0
stdw [%r10-8], 0
mov %r1, %r10
add %r1, -16
mov %r2, 16
call 1002
mov %r0, 0
exit
