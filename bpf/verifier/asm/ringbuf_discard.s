# expect: accept
# env: socket_filter
# map: events ringbuf 0 0 4096
lddw %r1, map:events
mov %r2, 8
mov %r3, 0
call 131
jne %r0, 0, got
mov %r0, 0
exit
got:
mov %r1, %r0
mov %r2, 0
call 133
mov %r0, 0
exit
