// flashot-gui: align two data sets with entropic optimal transport and look at the result.

#include <QApplication>
#include <QCoreApplication>
#include <QTimer>

#include <cstdio>
#include <stdexcept>

#include "command_line.hpp"
#include "flashot/flashot.hpp"
#include "main_window.hpp"

int main(int argc, char** argv) {
  // --help, --version and a bad command line are answered before the QApplication exists, under a
  // QCoreApplication, which needs no display: no Qt platform plugin is loaded for them.
  {
    QCoreApplication probe(argc, argv);
    QCoreApplication::setApplicationName("flashot-gui");
    flashot::gui::CommandLine command_line;
    try {
      command_line = flashot::gui::parse_command_line(QCoreApplication::arguments());
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "flashot-gui: %s\n%s", e.what(), flashot::gui::usage_text().toLocal8Bit().constData());
      return 2;
    }
    if (command_line.help) {
      std::fputs(flashot::gui::usage_text().toLocal8Bit().constData(), stdout);
      return 0;
    }
    if (command_line.version) {
      std::printf("flashot-gui %s (Qt %s)\n", flashot::version().c_str(), qVersion());
      return 0;
    }
  }
  QApplication app(argc, argv);
  QApplication::setApplicationName("flashot-gui");
  // Parsed again: QApplication has taken its own options (-platform, …) out of the arguments.
  flashot::gui::CommandLine command_line;
  try {
    command_line = flashot::gui::parse_command_line(QApplication::arguments());
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "flashot-gui: %s\n", e.what());
    return 2;
  }
  flashot::gui::MainWindow window;
  if (command_line.headless()) {
    window.resize(command_line.width, command_line.height);
  } else {
    window.resize(1400, 900);
  }
  window.show();
  // After show(), so the view has its size when the first frame renders.
  QTimer::singleShot(0, &window, [&window, command_line] { window.apply_command_line(command_line); });
  return QApplication::exec();
}
