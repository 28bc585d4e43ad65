# expect: reject out-of-bounds
# env: xdp
# map: counts array 4 8 4
# review attack: a scalar grows by 8 each may_goto iteration and is added to a map value pointer.
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:counts
call 1
jeq %r0, 0, out
mov %r6, 0
loop:
may_goto done
add %r6, 8
ja loop
done:
add %r0, %r6
ldxdw %r1, [%r0+0]
out:
mov %r0, 2
exit
