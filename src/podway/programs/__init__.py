"""The long-running programs: standalone (``podway run``), demo, controller, agent, lab, VIP
speakers, IPAM."""
