package multicast

import "strings"

// MatchTopic reports whether topic matches pattern: segments are separated by dots, '*' matches
// exactly one segment, '>' as the last segment matches one or more. An empty pattern matches all.
func MatchTopic(pattern, topic string) bool {
	if pattern == "" {
		return true
	}
	for {
		p, prest, pmore := strings.Cut(pattern, ".")
		if p == ">" && !pmore {
			return topic != ""
		}
		t, trest, tmore := strings.Cut(topic, ".")
		if p != "*" && p != t {
			return false
		}
		if !pmore || !tmore {
			return pmore == tmore
		}
		pattern, topic = prest, trest
	}
}

// topicFilter returns a filter for a list of patterns, nil when every topic is wanted.
func topicFilter(patterns []string) func(string) bool {
	for _, p := range patterns {
		if p == "" || p == ">" {
			return nil
		}
	}
	if len(patterns) == 0 {
		return nil
	}
	return func(topic string) bool {
		for _, p := range patterns {
			if MatchTopic(p, topic) {
				return true
			}
		}
		return false
	}
}
