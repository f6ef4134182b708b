package multicast

import (
	"fmt"
	"net"
	"net/netip"
)

// resolveGroup parses "239.255.0.1:7400" and checks that it is an IPv4 multicast address.
func resolveGroup(s string) (netip.AddrPort, error) {
	if s == "" {
		s = DefaultGroup
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, fmt.Errorf("group %q: %w: %w", s, ErrBadConfig, err)
	}
	if !ap.Addr().Is4() || !ap.Addr().IsMulticast() || ap.Port() == 0 {
		return ap, fmt.Errorf("group %q is not an IPv4 multicast address with a port (use 239.x.x.x:port): %w", s, ErrBadConfig)
	}
	return ap, nil
}

// resolveInterface finds the named interface; "" means the interface of the route to the group,
// else the first up multicast interface, else loopback. It also returns its first IPv4 address.
func resolveInterface(name string, group netip.AddrPort) (*net.Interface, netip.Addr, error) {
	if name != "" {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return nil, netip.Addr{}, fmt.Errorf("interface %q: %w", name, err)
		}
		return ifi, ifaceAddr(ifi), nil
	}
	if c, err := net.Dial("udp4", group.String()); err == nil {
		local := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
		c.Close()
		ifs, _ := net.Interfaces()
		for i := range ifs {
			if ifaceAddr(&ifs[i]) == local {
				return &ifs[i], local, nil
			}
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, netip.Addr{}, err
	}
	for _, want := range []net.Flags{net.FlagUp | net.FlagMulticast, net.FlagUp | net.FlagLoopback} {
		for i := range ifs {
			if ifs[i].Flags&want == want && ifaceAddr(&ifs[i]).IsValid() {
				return &ifs[i], ifaceAddr(&ifs[i]), nil
			}
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("no interface for multicast: name one with Interface")
}

func ifaceAddr(ifi *net.Interface) netip.Addr {
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && n.IP.To4() != nil {
				return ip
			}
		}
	}
	return netip.Addr{}
}
