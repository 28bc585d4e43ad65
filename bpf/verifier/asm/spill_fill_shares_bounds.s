# expect: accept
# env: xdp
# map: table array 4 32 1
# A bound learnt on the filled copy reaches the spilled register (one id for both).
stw [%r10-12], 0
mov %r2, %r10
add %r2, -12
lddw %r1, map:table
call 1
jeq %r0, 0, out
mov %r6, %r0
call 7
stxdw [%r10-8], %r0
ldxdw %r1, [%r10-8]
jgt %r1, 7, out
add %r6, %r0
ldxb %r0, [%r6+0]
out:
mov %r0, 2
exit
