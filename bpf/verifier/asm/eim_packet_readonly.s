# expect: reject read-only
# env: eim eim/packet.yaml packet_in filter
ldxdw %r2, [%r1+0]
ldxdw %r3, [%r1+8]
mov %r4, %r2
add %r4, 1
jgt %r4, %r3, pass
stb [%r2+0], 0
pass:
mov %r0, 0
exit
