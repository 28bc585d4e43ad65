# expect: accept
# env: socket_filter
ldxh %r0, [%r1+8]
ldxb %r2, [%r1+11]
add %r0, %r2
exit
