# expect: reject pointer-leak
# env: xdp
# kernel: skip privileged kernel allows partial spills
stxw [%r10-8], %r1
mov %r0, 0
exit
