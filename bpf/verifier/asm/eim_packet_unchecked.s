# expect: reject out-of-bounds
# env: eim eim/packet.yaml packet_in filter
ldxdw %r2, [%r1+0]
ldxb %r0, [%r2+0]
and %r0, 1
exit
