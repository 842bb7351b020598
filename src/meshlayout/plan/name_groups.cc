#include "meshlayout/plan/name_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace meshlayout {

std::string format_ranges(std::vector<int64_t> values, size_t max_ranges) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::string out;
  size_t ranges = 0;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    if (ranges++ == max_ranges) {
      out += ",…";
      break;
    }
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", values[i]) : fmt::format("{}–{}", values[i], values[j]);
    i = j + 1;
  }
  return out;
}

std::vector<NameGroup> group_names(const std::vector<std::string_view>& names) {
  struct Building {
    std::vector<std::string_view> literals;
    std::vector<std::vector<int64_t>> numbers;  // per digit position
    size_t count = 0;
  };
  std::vector<Building> building;
  std::unordered_map<std::string, size_t> index;
  std::vector<std::string_view> literals;
  std::vector<int64_t> numbers;
  for (std::string_view name : names) {
    literals.clear();
    numbers.clear();
    std::string key;
    size_t start = 0;
    for (size_t i = 0; i < name.size();) {
      if (name[i] < '0' || name[i] > '9') {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
      // Short runs without leading zeros are numbers; others stay text.
      if (j - i <= 9 && (name[i] != '0' || j - i == 1)) {
        literals.push_back(name.substr(start, i - start));
        numbers.push_back(std::stoll(std::string(name.substr(i, j - i))));
        key.append(literals.back());
        key += '\x1f';
        start = j;
      }
      i = j;
    }
    literals.push_back(name.substr(start));
    key.append(literals.back());
    auto [it, added] = index.try_emplace(key, building.size());
    if (added) building.push_back({literals, std::vector<std::vector<int64_t>>(numbers.size()), 0});
    Building& b = building[it->second];
    ++b.count;
    for (size_t k = 0; k < numbers.size(); ++k) b.numbers[k].push_back(numbers[k]);
  }
  std::vector<NameGroup> out;
  for (Building& b : building) {
    std::string text;
    for (size_t k = 0; k < b.numbers.size(); ++k) {
      text.append(b.literals[k]);
      std::vector<int64_t>& v = b.numbers[k];
      const bool same = std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v.front(); });
      text += same ? fmt::format("{}", v.front()) : "{" + format_ranges(std::move(v)) + "}";
    }
    text.append(b.literals.back());
    out.push_back({std::move(text), b.count});
  }
  return out;
}

}  // namespace meshlayout
