# expect: reject pointer-leak
# env: xdp
call local f
mov %r0, 0
exit
f:
mov %r0, %r10
exit
