# expect: reject ctx-access
# env: xdp
# A sign-extending load of xdp_md.data is not the packet pointer.
ldxsw %r2, [%r1+0]
ldxw %r3, [%r1+4]
mov %r4, %r2
add %r4, 8
jgt %r4, %r3, out
ldxdw %r0, [%r2+0]
out:
mov %r0, 2
exit
