#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace hg {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  // "cpu", "cuda" or "cuda:N" (torch's device strings); anything else is an hg::Error naming the forms
  static Device parse(const std::string& s);
};

inline std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace hg
