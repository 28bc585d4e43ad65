# expect: reject helper-arg
# env: xdp
# map: events ringbuf 0 0 4096
# A ring buffer holds records, not values: the data-map helpers do not take it.
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:events
call 1
mov %r0, 2
exit
