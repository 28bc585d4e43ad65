# expect: reject return-value
# env: eim eim/packet.yaml packet_in filter
ldxw %r0, [%r1+16]
exit
