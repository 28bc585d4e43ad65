# expect: accept
# env: socket_filter
ldxw %r0, [%r1+0]
exit
