# expect: accept
# env: xdp
# `data_meta - data` in 32 bits: an offset, not an address.
ldxw %r2, [%r1+0]
ldxw %r3, [%r1+8]
sub32 %r3, %r2
mov %r0, %r3
exit
