# expect: reject invalid-mem-base
# env: xdp
# map: pc percpu_array 4 16 1
# Direct value access exists for one-element array maps only (the kernel agrees).
lddw %r1, mapvalue:pc+0
stdw [%r1+0], 1
mov %r0, 2
exit
