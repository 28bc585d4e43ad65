# expect: accept
# env: xdp
# worst: 2
mov %r0, 2
exit
