# expect: accept
# env: eim eim/packet.yaml packet_in filter
ldxdw %r2, [%r1+0]
ldxdw %r3, [%r1+8]
mov %r4, %r2
add %r4, 14
jgt %r4, %r3, pass
ldxh %r5, [%r2+12]
jne %r5, 0x0008, pass
mov %r0, 1
exit
pass:
mov %r0, 0
exit
