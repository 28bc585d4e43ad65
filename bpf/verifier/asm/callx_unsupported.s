# expect: reject unsupported
# env: xdp
mov %r2, 1
call %r2
mov %r0, 0
exit
