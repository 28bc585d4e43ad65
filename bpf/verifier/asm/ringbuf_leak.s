# expect: reject unreleased-reference
# env: xdp
# map: events ringbuf 0 0 4096
lddw %r1, map:events
mov %r2, 16
mov %r3, 0
call 131
mov %r0, 2
exit
