"""The lab: a Kubernetes-like cluster on one Linux machine, built from network namespaces.

``plan`` (addresses and names, pure), ``network`` (namespaces, links, routes), ``state`` (the
state folder every lab process and file is recorded in), ``controlplane`` (the API emulator with
admission and persistence), ``cluster`` (Deployments → Pods → scheduling → EndpointSlices, pure
decisions), ``kubeproxy`` (NodePort rules, pure payloads), ``kubelet`` (pods as namespaces with
``podway echo``, readiness probes), ``daemon`` (the one supervising process), ``compare`` (the
three modes side by side). The CLI is ``podway.cli.commands.lab``; the guide is ``docs/lab.md``.
"""
