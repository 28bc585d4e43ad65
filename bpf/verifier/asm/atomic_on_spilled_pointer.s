# expect: reject pointer-leak
# env: xdp
# kernel: skip the privileged kernel allows atomics on a slot holding a spilled pointer
# An atomic add would turn the saved ctx pointer into a number (and fetch its address).
stxdw [%r10-8], %r1
mov %r2, 1
lock fetch add [%r10-8], %r2
mov %r0, 0
exit
