# expect: reject var-stack-offset
# env: xdp
# map: table array 4 64 1
# kernel: skip the privileged kernel lets helpers take buffers at variable stack offsets
stdw [%r10-8], 0
stdw [%r10-16], 0
call 7
and %r0, 4
mov %r2, %r10
add %r2, -16
add %r2, %r0
lddw %r1, map:table
call 1
mov %r0, 0
exit
