#!/usr/bin/ruby
# A STOMP 1.2 client-individual ACK/NACK round trip with the Debian
# ruby-stomp gem (Stomp::Connection) against a Herald broker.
#
# Usage: rubystomp_ack.rb HOST:PORT DESTINATION
#
# Prints one JSON object on stdout and exits 0, or prints a message on
# stderr and exits non-zero. The Go test judges the JSON.
require 'json'
require 'timeout'
require 'stomp'

def die(msg)
  $stderr.puts "rubystomp_ack: #{msg}"
  exit 2
end

host, port = ARGV[0].to_s.split(':')
dest = ARGV[1]
die 'usage: rubystomp_ack.rb HOST:PORT DESTINATION' if host.nil? || port.nil? || dest.nil?

begin
  conn = Stomp::Connection.new(
    hosts: [{ login: 'interop', passcode: 'x', host: host, port: port.to_i, ssl: false }],
    reliable: false,
    connect_timeout: 5,
    connread_timeout: 5,
    connect_headers: { 'accept-version' => '1.2', 'host' => 'herald', 'heart-beat' => '0,0' }
  )
  die "not connected: #{conn.connection_frame.inspect}" unless conn.open?
  connected = conn.connection_frame.headers

  # Frames arrive in order on one connection; keep MESSAGEs and RECEIPTs apart.
  messages = []
  receipts = []
  next_frame = lambda do
    f = Timeout.timeout(10) { conn.receive }
    die 'connection closed' if f.nil?
    die "ERROR frame: #{f.headers.inspect} #{f.body}" if f.command == 'ERROR'
    (f.command == 'RECEIPT' ? receipts : messages) << f
  end
  wait_receipt = lambda do |id|
    next_frame.call until receipts.any? { |r| r.headers['receipt-id'] == id }
  end
  wait_messages = lambda do |n|
    next_frame.call while messages.size < n
  end

  3.times { |i| conn.publish(dest, "rb-#{i}", 'receipt' => "s#{i}") }
  3.times { |i| wait_receipt.call("s#{i}") }

  conn.subscribe(dest, { 'ack' => 'client-individual', 'id' => 'sub-rb', 'receipt' => 'sub' })
  wait_receipt.call('sub')
  wait_messages.call(3)
  first = messages.first(3)
  conn.ack(first[0].headers['ack'], 'receipt' => 'a0')
  conn.nack(first[1].headers['ack'], 'receipt' => 'n1')
  conn.ack(first[2].headers['ack'], 'receipt' => 'a2')
  %w[a0 n1 a2].each { |r| wait_receipt.call(r) }
  wait_messages.call(4)
  again = messages[3]
  conn.ack(again.headers['ack'], 'receipt' => 'a-again')
  wait_receipt.call('a-again')
  sleep 0.5 # anything arriving now would be a duplicate
  while (f = conn.poll)
    (f.command == 'RECEIPT' ? receipts : messages) << f
  end
  conn.unsubscribe(dest, { 'id' => 'sub-rb', 'receipt' => 'unsub' })
  wait_receipt.call('unsub')
  conn.disconnect('receipt' => 'bye')

  puts JSON.generate(
    'protocol' => conn.protocol,
    'connected' => connected,
    'first' => first.map { |m| { 'body' => m.body, 'headers' => m.headers } },
    'again' => messages.drop(3).map { |m| { 'body' => m.body, 'headers' => m.headers } },
    'stomp_gem_version' => Stomp::Version::STRING
  )
rescue Timeout::Error
  die "timed out; messages=#{messages&.size} receipts=#{receipts&.map { |r| r.headers['receipt-id'] }.inspect}"
rescue SystemExit
  raise
rescue Exception => e
  die "#{e.class}: #{e.message}"
end
