# expect: accept
# env: xdp
# Metadata bytes become readable once `data_meta + 4 <= data` is known.
ldxw %r2, [%r1+8]
ldxw %r3, [%r1+0]
mov %r4, %r2
add %r4, 4
jgt %r4, %r3, out
ldxw %r0, [%r2+0]
and %r0, 1
exit
out:
mov %r0, 2
exit
