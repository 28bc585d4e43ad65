# expect: accept
# env: xdp
# `data + 0xffff < data_end` (the largest offset a check teaches) grants byte 0xffff.
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r4, %r2
add %r4, 0xfffe
jge %r4, %r3, drop
ldxb %r0, [%r4+0]
mov %r4, %r2
add %r4, 0xffff
jge %r4, %r3, drop
ldxb %r0, [%r4+0]
mov %r0, 2
exit
drop:
mov %r0, 1
exit
