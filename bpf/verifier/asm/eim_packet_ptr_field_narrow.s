# expect: reject ctx-access
# env: eim eim/packet.yaml packet_in filter
ldxw %r2, [%r1+0]
mov %r0, 0
exit
