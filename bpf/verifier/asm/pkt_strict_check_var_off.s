# expect: reject out-of-bounds
# env: xdp
# A strict check through a variable-offset pointer at the largest packet offset (umax
# 0xffff) grants one byte, not two.
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r4, %r2
add %r4, 1
jgt %r4, %r3, drop
ldxb %r5, [%r2+0]
and %r5, 0xff
lsh %r5, 8
or %r5, 0xff
mov %r6, %r2
add %r6, %r5
jge %r6, %r3, drop
ldxb %r0, [%r6+0]
ldxb %r0, [%r6+1]
mov %r0, 2
exit
drop:
mov %r0, 1
exit
