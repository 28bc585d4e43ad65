# expect: reject uninit-register
# env: xdp
# map: counts array 4 8 4
# review attack: a map value pointer advanced 8 bytes per may_goto iteration, read after the loop.
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:counts
call 1
jeq %r0, 0, out
loop:
may_goto done
add %r0, 8
ja loop
done:
ldxdw %r1, [%r0+0]
out:
mov %r0, 2
exit
