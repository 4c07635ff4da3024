"""Engine-neutral parts every engine kind shares: member health reports to the controller, where
they go, and who may hold an engine's unix sockets. Each engine kind (``podway.envoy`` today) has
a folder of its own beside this one and reads only the IR."""
