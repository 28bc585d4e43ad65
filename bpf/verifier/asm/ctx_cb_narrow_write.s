# expect: accept
# env: socket_filter
# A one-byte store into `__sk_buff.cb` is allowed (as in the kernel).
stb [%r1+54], 90
mov %r0, 0
exit
