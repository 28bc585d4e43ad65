# expect: reject call-depth
# env: xdp
call local f
exit
f:
call local f
mov %r0, 0
exit
