# expect: reject too-complex
# env: xdp
# map: events ringbuf 0 0 4096
# review attack: record reserved per iteration, checked non-null, then dropped.
loop:
may_goto done
lddw %r1, map:events
mov %r2, 16
mov %r3, 0
call 131
jeq %r0, 0, loop
mov %r6, %r0
ja loop
done:
mov %r0, 2
exit
