# expect: reject pointer-arith
# env: xdp
# Adding constants whose sum is not representable used to leave the pointer with data's id
# and range: the comparison below then granted 0x1ffffff0 bytes to `data` itself and the
# store wrote 4 KiB past a 64-byte packet.
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r4, %r2
lddw %r5, -1099511627776
add %r4, %r5
add %r4, 0x1ffffff0
lddw %r5, 1098974756880
add %r4, %r5
jgt %r4, %r3, out
stdw [%r2+4096], 0
out:
mov %r0, 2
exit
