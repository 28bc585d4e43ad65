# expect: reject unreleased-reference
# env: xdp
# map: events ringbuf 0 0 4096
lddw %r1, map:events
mov %r2, 16
mov %r3, 0
call 131
jeq %r0, 0, out
mov %r6, %r0
call 7
jgt %r0, 10, out
mov %r1, %r6
mov %r2, 0
call 132
out:
mov %r0, 2
exit
