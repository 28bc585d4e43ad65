# expect: accept
# env: xdp
# worst: 33
mov %r0, 0
mov %r1, 0
loop:
add %r0, %r1
add %r1, 1
jlt %r1, 10, loop
exit
