# expect: accept
# env: xdp
mov %r1, 20
mov %r2, 22
call local add
exit
add:
mov %r0, %r1
add %r0, %r2
exit
