# expect: accept
# env: socket_filter
# worst: 2
mov %r0, 0
exit
