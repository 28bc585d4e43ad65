# expect: reject unreleased-reference
# env: xdp
# map: events ringbuf 0 0 4096
# map: progs prog_array 4 4 4
mov %r6, %r1
lddw %r1, map:events
mov %r2, 16
mov %r3, 0
call 131
jeq %r0, 0, out
mov %r7, %r0
mov %r1, %r6
lddw %r2, map:progs
mov %r3, 0
call 12
mov %r1, %r7
mov %r2, 0
call 133
out:
mov %r0, 2
exit
