# expect: reject uninit-stack
# env: xdp
# review attack: each iteration reads fp-16..fp-1 at a variable offset, then spills a pointer
# into fp-16: the second iteration's read covers the pointer.
stdw [%r10-8], 0
stdw [%r10-16], 0
loop:
may_goto done
call 7
and %r0, 8
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxdw %r6, [%r1+0]
stxdw [%r10-16], %r10
ja loop
done:
mov %r0, %r6
exit
