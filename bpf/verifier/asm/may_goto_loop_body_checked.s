# expect: reject out-of-bounds
# env: xdp
# A may_goto loop is verified over every iteration: the growing index leaves the map value.
# map: table array 4 8 1
stw [%r10-4], 0
mov %r2, %r10
add %r2, -4
lddw %r1, map:table
call 1
jeq %r0, 0, out
mov %r6, 0
loop:
may_goto out
mov %r1, %r0
add %r1, %r6
ldxb %r2, [%r1+0]
add %r6, 1
ja loop
out:
mov %r0, 0
exit
