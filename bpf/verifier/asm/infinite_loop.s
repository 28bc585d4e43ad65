# expect: reject infinite-loop
# env: xdp
mov %r0, 0
loop:
ja loop
