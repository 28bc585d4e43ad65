# expect: accept
# env: xdp
mov %r2, 5
jeq %r2, 5, ok
ldxdw %r0, [%r2+0]
exit
ok:
mov %r0, 2
exit
