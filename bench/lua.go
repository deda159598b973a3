package main

// wrkScript picks a random path from $BENCH_PATHS for every request (or walks
// the list in order when $BENCH_ORDERED is set, for replays) and sends
// $BENCH_AUTH as the Authorization header when set.
const wrkScript = `
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do paths[#paths + 1] = line end
local auth = os.getenv("BENCH_AUTH")
local ordered = os.getenv("BENCH_ORDERED") == "1"
local headers = {}
if auth ~= nil and auth ~= "" then headers["Authorization"] = auth end
local i = 0
function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
  i = math.random(#paths) - 1
end
function request()
  local p
  if ordered then
    i = (i % #paths) + 1
    p = paths[i]
  else
    p = paths[math.random(#paths)]
  end
  return wrk.format("GET", p, headers)
end
`
