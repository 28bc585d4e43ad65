# expect: reject too-complex
# env: xdp
# map: events ringbuf 0 0 4096
# review attack: one ring-buffer record reserved (and leaked) per may_goto iteration.
loop:
may_goto done
lddw %r1, map:events
mov %r2, 16
mov %r3, 0
call 131
ja loop
done:
mov %r0, 2
exit
