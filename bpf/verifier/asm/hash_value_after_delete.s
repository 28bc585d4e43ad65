# expect: accept
# env: xdp
# map: flows hash 8 8 4
# A value pointer stays a value pointer when its entry is deleted during the run: the slot
# is still the map's memory (the kernel keeps the element until the program ends). The
# campaign's state embedding once took the deleted slot for a wrong claim; see
# docs/results/verifier-campaign.md.
stdw [%r10-8], 0
stdw [%r10-16], 7
mov %r2, %r10
add %r2, -8
mov %r3, %r10
add %r3, -16
lddw %r1, map:flows
mov %r4, 0
call 2
mov %r2, %r10
add %r2, -8
lddw %r1, map:flows
call 1
jeq %r0, 0, out
mov %r6, %r0
mov %r2, %r10
add %r2, -8
lddw %r1, map:flows
call 3
ldxdw %r0, [%r6+0]
out:
mov %r0, 2
exit
