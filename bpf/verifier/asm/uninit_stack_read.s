# expect: reject uninit-stack
# env: xdp
# kernel: skip the privileged kernel lets programs read uninitialised stack (rdx never does: it is host memory)
ldxdw %r0, [%r10-8]
exit
