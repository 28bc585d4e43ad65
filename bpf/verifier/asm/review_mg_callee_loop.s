# expect: reject uninit-stack
# env: xdp
# kernel: skip a slot whose contents change between may_goto passes is forgotten by rdx's widening (refused, less precise than the kernel)
# review attack: the may_goto loop is in a callee that spills its caller's frame pointer into the
# caller's frame on later passes... (callee can't write caller frame with var, so: callee loop
# writes a pointer into its own frame and reads it back as a number at a variable offset).
call local f
exit
f:
stdw [%r10-8], 0
stdw [%r10-16], 0
mov %r6, 0
floop:
may_goto fdone
call 7
and %r0, 8
mov %r1, %r10
add %r1, -16
add %r1, %r0
ldxdw %r6, [%r1+0]
stxdw [%r10-8], %r10
ja floop
fdone:
mov %r0, %r6
exit
