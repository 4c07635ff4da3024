"""Give each file named on the command line the file capability cap_net_bind_service+ep.

Run by deploy/image/setup-root.sh on the two proxy binaries of the image (Envoy and HAProxy) so
that an engine running as uid 10001 binds ports below 1024 with nothing else: Kubernetes gives a
non-root container's added capabilities to its bounding set only, and a file capability is
what lifts one of them into the process that execs the file (when no_new_privs is not set:
the engine's allowPrivilegeEscalation: true; docs/security.md). The same as
``setcap cap_net_bind_service+ep FILE`` without adding libcap's tools to the image.
"""

import os
import struct
import sys

VFS_CAP_REVISION_2 = 0x02000000
VFS_CAP_FLAGS_EFFECTIVE = 0x000001
CAP_NET_BIND_SERVICE = 10


def main(paths: list[str]) -> None:
    # struct vfs_cap_data, revision 2: magic_etc, then (permitted, inheritable) for the low
    # and high 32 capabilities.
    value = struct.pack("<IIIII", VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE,
                        1 << CAP_NET_BIND_SERVICE, 0, 0, 0)
    for path in paths:
        os.setxattr(os.path.realpath(path), "security.capability", value)


if __name__ == "__main__":
    main(sys.argv[1:])
