# expect: accept
# env: eim eim/http.yaml http_request observer
call 1001
mov %r1, %r0
mov %r0, 0
loop:
add %r0, 1
jne %r0, %r1, loop
mov %r0, 0
exit
