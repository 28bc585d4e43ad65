# expect: accept
# env: xdp
# A loop bounded only by may_goto (`while (can_loop)`): both ways are explored and the
# counting registers are widened where the loop closes; the load in the body stays checked.
stdw [%r10-8], 3
stdw [%r10-16], 5
call 7
and %r0, 8
mov %r8, %r10
add %r8, -16
add %r8, %r0
mov %r6, 0
mov %r7, 0
loop:
may_goto done
ldxdw %r3, [%r8+0]
add %r7, %r3
add %r6, 1
ja loop
done:
mov %r0, %r7
exit
