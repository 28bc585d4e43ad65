# expect: reject ctx-access
# env: socket_filter
ldxw %r0, [%r1+76]
exit
