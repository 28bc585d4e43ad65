# expect: reject out-of-bounds
# env: xdp
# map: counts array 4 8 4
# review attack: a map-value pointer advanced by a variable (masked) amount each pass.
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:counts
call 1
jeq %r0, 0, out
mov %r6, %r0
loop:
may_goto done
call 7
and %r0, 1
add %r6, %r0
ja loop
done:
ldxb %r1, [%r6+0]
out:
mov %r0, 2
exit
