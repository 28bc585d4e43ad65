# expect: reject bad-cfg
# env: xdp
mov %r0, 0
