# expect: accept
# env: xdp
stdw [%r10-16], 0x1234
stw [%r10-8], 7
sth [%r10-4], 9
stb [%r10-2], 1
stb [%r10-1], 2
call 7
and %r0, 15
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxb %r0, [%r1+0]
exit
